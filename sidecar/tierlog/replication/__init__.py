"""Replicas of a partition on several brokers: where they go, and how they follow."""
