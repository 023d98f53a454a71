"""arq 0.28.0 without ackgap: with keep_result_forever=True a job that exceeds
max_tries vanishes. finish_failed_job sends SET result PX 0 (arq issue #314,
PR #532); the server refuses that one command inside EXEC, after the job's
DELs and ZREM ran, so no result is written and the worker raises.
Usage: python px0.py PORT   (an empty throwaway server: it is FLUSHALLed)"""
import asyncio
import sys

from arq.connections import RedisSettings, create_pool
from arq.worker import Retry, Worker

PORT = int(sys.argv[1])


async def job(ctx):
    raise Retry(defer=0.01)


async def main():
    redis = await create_pool(RedisSettings(port=PORT))
    await redis.flushall()
    await redis.enqueue_job('job', _job_id='j1')
    w = Worker([job], redis_pool=redis, burst=True, max_tries=1, keep_result_forever=True, handle_signals=False,
               poll_delay=0.01)
    try:
        await w.main()
    except Exception as e:
        print('worker raised:', type(e).__name__, str(e)[-60:])
    print('keys of j1 left:', sorted(k.decode() for k in await redis.keys('arq:*j1*')))


asyncio.run(main())
