"""arq 0.28.0 without ackgap, stock settings: a worker paused longer than its
job's in-progress key lives (job_timeout + 10 s) raises Retry after another
worker ran and finished the job. finish_job(finish=False) ZINCRBYs the job
id back into the queue, beside its result and without its job key; the next
worker to take it (C) fails it as "job expired" and replaces the result.
Usage: python stale_retry.py PORT A & sleep 1; python stale_retry.py PORT B
(an empty throwaway server: A FLUSHALLs it)."""
import asyncio
import logging
import sys
import time

from arq.connections import RedisSettings, create_pool
from arq.worker import Retry, Worker

PORT = int(sys.argv[1])
logging.basicConfig(level=logging.WARNING, format='%(name)s: %(message)s', stream=sys.stdout)


async def show(redis, who):
    results = await redis.all_job_results()
    print(who, '| queue:', await redis.zrange('arq:queue', 0, -1), '| job key:', await redis.exists('arq:job:j1'),
          '| result:', [(r.success, repr(r.result)) for r in results], flush=True)


async def job(ctx):
    if ctx['worker'] == 'A' and ctx['job_try'] == 1:
        time.sleep(11)  # a pause (GC, swap, SIGSTOP, a blocked loop) longer than 0.5 s + 10 s
        raise Retry(defer=0.1)
    return ctx['worker']


async def after(ctx):
    redis = await create_pool(RedisSettings(port=PORT))
    await show(redis, f"{ctx['worker']} ended try {ctx['job_try']}")


async def main(name):
    redis = await create_pool(RedisSettings(port=PORT))
    if name == 'A':
        await redis.flushall()
        await redis.enqueue_job('job', _job_id='j1')
    w = Worker([job], redis_pool=redis, burst=True, job_timeout=0.5, handle_signals=False, poll_delay=0.1,
               ctx={'worker': name}, after_job_end=after)
    await w.main()
    await show(redis, f'{name} done')
    if name == 'A':  # one more worker, C, polls the queue
        c = Worker([job], redis_pool=redis, burst=True, handle_signals=False, poll_delay=0.1, ctx={'worker': 'C'})
        await c.main()
        await show(redis, 'C done')


asyncio.run(main(sys.argv[2]))
