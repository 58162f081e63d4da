"""What runs inside the sandbox: standard library only, importing nothing of ours (see docs/code-sandbox.md)."""
