"""What the operator does itself where kopf's machinery does not serve; each piece's reason, with the
figures behind it, is in docs/design.md, "kopf and what is custom".

* :mod:`.informer` — list-then-watch into memory: the VariantAutoscalings (kopf's per-event
  processing of the cycle's own status writes costs more) and the operator namespace's ConfigMaps
  (kopf would watch them in every served namespace);
* :mod:`.lease` — leader election on a Lease (kopf has none), run by kopf's startup, cleanup and probe
  handlers;
* :mod:`.events` — Events with names derived from the fact they report (kopf's get generated names),
  posted while the caller still leads.

Nothing here imports kopf; ``handlers.py`` wires it.
"""
