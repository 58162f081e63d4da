"""The host side of the code sandbox: launches, confines, limits and supervises (see docs/code-sandbox.md)."""
