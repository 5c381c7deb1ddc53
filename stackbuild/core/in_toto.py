"""The in-toto Statement (v1) every attestation of this project is: its type and its media type."""

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MEDIA_TYPE = "application/vnd.in-toto+json"
