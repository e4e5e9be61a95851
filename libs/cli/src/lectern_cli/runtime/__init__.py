"""The embedded stack ``lectern up`` runs: Postgres, NATS and the services as child processes
(``supervisor``), what runs where (``processes``), each child (``children``), the stack's
state on disk (``state``: ``stack.json``, read by ``lectern status`` and ``lectern eval``) and
a stack started for an evaluation (``embedded``). The servers themselves (embedded NATS and
Postgres) are ``lectern_common.runtime``'s, which the tests' fixtures use too."""
