"""Built-in plugins. They register through the same public hooks as third-party plugins (``trylast`` so a
user plugin's hookimpl runs first), and each holds its own implementation in its package (``gsm8k``, ``parsers``,
``dispatchers``, ``engines``, ``runtimes``, ``trainer``, ``eval``, ``viewer``, ``curation``, ``catalog``,
``example_configs``, ``bench``) or module (``generic_tools``, ``scaffold``)."""
