"""Jobs as Prometheus metrics: ``families`` (pure: statuses -> metric families), ``collector`` (the
index read at each scrape), ``textfile`` (node_exporter's textfile collector) and ``serve`` (the
HTTP exporter), behind ``fsdp-orch metrics``."""
