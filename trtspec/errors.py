"""The one exception type users see.

Every user mistake (bad path, bad tensor, unsupported option) is raised as `TrtspecError` with a
single line naming the file, tensor or field and what was expected. The CLI prints that line and
exits with status 2 instead of showing a traceback from deep inside torch.
"""


class TrtspecError(Exception):
    """A user-facing error: the message is one line that says what is wrong and what was expected."""
