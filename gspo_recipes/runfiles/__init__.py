"""What a run leaves behind: gspo_diagnostics.jsonl (format, writer, reader) and the warnings recorded in it."""
