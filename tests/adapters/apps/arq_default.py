"""A user's arq WorkerSettings with arq's defaults (a job's result is kept
for keep_result = 3600 s). ackgap's tests run it with
`--app arq_default:WorkerSettings` (tests/integration/apps.rs)."""

from arq.connections import RedisSettings


async def send_email(ctx, address):
    return address


class WorkerSettings:
    functions = [send_email]
    redis_settings = RedisSettings(host="localhost", port=6379)
