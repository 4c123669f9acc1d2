"""Built-in plugin module (filled in by its owner)."""
