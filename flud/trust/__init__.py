"""Trust and fairness, sans I/O: who may store on whom (placement rules a
single host cannot capture, reputation, friends' certificates) and what an
owner may take for what it gives (the give-to-get ledger). Pure logic on an
injected clock; the node and the client carry it over the wire."""
