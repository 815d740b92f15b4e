"""Support: errors, the wall clock, counters, an LRU, value rendering and logging; imports nothing else of
``node``."""
