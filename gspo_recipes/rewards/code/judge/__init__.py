"""The judge: runs the dataset's tests, never the model's code (see docs/code-sandbox.md)."""
