"""The one error type a user can cause (bad path, corrupt file, unknown architecture, bad option)."""


class GeodriftError(Exception):
    """A problem the user can fix. The message names the thing (file, tensor, option) and the fix.

    The CLI prints it on one line and exits with status 2, without a traceback.
    """
