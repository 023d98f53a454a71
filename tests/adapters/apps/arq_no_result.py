"""A user's arq WorkerSettings that keeps no results (keep_result = 0, for
jobs whose return value nobody reads). ackgap's tests run it with
`--app arq_no_result:WorkerSettings` (tests/integration/apps.rs)."""

from arq.connections import RedisSettings


async def send_email(ctx, address):
    return address


class WorkerSettings:
    functions = [send_email]
    redis_settings = RedisSettings(host="localhost", port=6379)
    keep_result = 0
