"""Built-in plugins. They register through the same public hooks as third-party plugins (``trylast`` so a
user plugin's hookimpl runs first)."""
