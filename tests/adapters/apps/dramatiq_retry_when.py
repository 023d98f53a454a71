"""A user's Dramatiq broker whose Retries middleware decides by a
predicate, as Dramatiq's documentation shows (`retry_when`): retry while
fewer than 3 retries were made. With retry_when set, Retries does not look
at max_retries, the message's own included. ackgap's tests run it with
`--app dramatiq_retry_when:broker` (tests/integration/apps.rs)."""

from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Retries, default_middleware


def should_retry(retries_so_far, exception):
    return retries_so_far < 3


broker = RedisBroker(
    url="redis://localhost:6379/0",
    middleware=[m() for m in default_middleware if m is not Retries] + [Retries(retry_when=should_retry)],
)
