"""Training, whatever the backend: the ``skyrl train`` loop (:mod:`.loop`), policy losses (:mod:`.losses`),
checkpoints (:mod:`.checkpoint`), metrics sinks (:mod:`.metrics`) and plots (:mod:`.plots`). The built-in
``local`` backend itself lives in :mod:`skyrl_core.default_plugins.backends.local`. Importing this package imports nothing heavy; torch loads with the submodules that need it."""
