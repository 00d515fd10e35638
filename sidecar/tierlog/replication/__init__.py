"""Replication: leaders, followers, the ISR and the high watermark (Kafka's model)."""
