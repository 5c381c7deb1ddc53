"""The applier's one failure: a refusal or a failed write (the tree is unchanged)."""

from __future__ import annotations


class OverlayError(Exception):
    """A refusal or failure; ``str()`` is one line per problem."""

    def __init__(self, errors):
        if isinstance(errors, str):
            errors = [errors]
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))
