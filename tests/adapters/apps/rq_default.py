"""A user's RQ job function as RQ's docs declare one, `@job(...)` with
RQ's defaults (a finished job and its result are kept for result_ttl =
500 s). ackgap's tests run it with `--app rq_default:send_email`
(tests/integration/apps.rs)."""

from redis import Redis
from rq.decorators import job

redis = Redis(host="localhost", port=6379)


@job("emails", connection=redis)
def send_email(address):
    return address
