"""arq 0.28.0 without ackgap, stock settings: a worker paused longer than its
job's in-progress key lives (job_timeout + 10 s) finishes the job after
another worker ran and finished it; both finish_job calls are written, the
stale one last. Usage: python stale.py PORT A & sleep 1; python stale.py PORT B
(an empty throwaway server: A FLUSHALLs it)."""
import asyncio
import sys
import time

from arq.connections import RedisSettings, create_pool
from arq.worker import Worker

PORT = int(sys.argv[1])


async def job(ctx):
    if ctx['worker'] == 'A':
        time.sleep(11)  # a pause (GC, swap, SIGSTOP, a blocked loop) longer than 0.5 s + 10 s
    return ctx['worker']


async def after(ctx):
    redis = await create_pool(RedisSettings(port=PORT))
    print(ctx['worker'], 'finished try', ctx['job_try'], '-> result now', (await redis.all_job_results())[0].result,
          flush=True)


async def main(name):
    redis = await create_pool(RedisSettings(port=PORT))
    if name == 'A':
        await redis.flushall()
        await redis.enqueue_job('job', _job_id='j1')
    w = Worker([job], redis_pool=redis, burst=True, job_timeout=0.5, handle_signals=False, poll_delay=0.1,
               ctx={'worker': name}, after_job_end=after)
    await w.main()


asyncio.run(main(sys.argv[2]))
