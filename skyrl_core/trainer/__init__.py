"""The built-in local trainer: the ``local`` backend (:mod:`.local`), its loss (:mod:`.losses`), checkpoints
(:mod:`.checkpoint`), the ``skyrl train`` loop (:mod:`.loop`), metrics sinks (:mod:`.logging`) and plots
(:mod:`.plots`). Importing this package imports nothing heavy; torch loads with the submodules that need it."""
