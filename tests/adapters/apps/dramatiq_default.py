"""A user's Dramatiq broker with Dramatiq's default middleware (Retries
honours each message's max_retries). ackgap's tests run it with
`--app dramatiq_default:broker` (tests/integration/apps.rs)."""

from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url="redis://localhost:6379/0")
