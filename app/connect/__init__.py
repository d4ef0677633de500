"""Which upstream a process reads from: the engines' registry (``engines``) and the frozen
``UpstreamConfig`` with ``make_upstream`` (``factory``), above the clients (``app.upstream``),
the simulator (``app.sim``) and the in-process engine (``app.inprocess``) it chooses among;
and the installed plugins (``plugins``: question kinds and answer sources), registered at each
process's start."""
