"""spark: the traffic tap's event schema and the decay-based (Forget Table) statistics job."""
