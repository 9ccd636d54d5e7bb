"""Who is on a GPU: names for process entities from /proc (and, later, pods and jobs), joined onto
readings from cached sources, off the sampler's thread and never per scrape."""
