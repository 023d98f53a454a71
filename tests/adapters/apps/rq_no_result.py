"""A user's RQ job function whose results are not kept (`result_ttl=0`:
RQ deletes a finished job at once). ackgap's tests run it with
`--app rq_no_result:send_email` (tests/integration/apps.rs)."""

from redis import Redis
from rq.decorators import job

redis = Redis(host="localhost", port=6379)


@job("emails", connection=redis, result_ttl=0)
def send_email(address):
    return address
