"""What arrives from a forge: webhook deliveries, proved and decided, turned into tasks."""
