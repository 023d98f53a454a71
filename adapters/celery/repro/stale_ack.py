"""kombu 5.7.0's Redis transport alone (no Celery worker, no ackgap): a
stale worker's ack removes the redelivered message's unacked entry, so the
new holder is no longer protected by the visibility timeout. Usage:
python stale_ack.py PORT (a throwaway server)."""
import sys, time
import redis
from kombu import Connection, Exchange, Queue

url = f"redis://127.0.0.1:{sys.argv[1]}/0"
opts = {"global_keyprefix": "kstale:", "visibility_timeout": 0.2}
r = redis.Redis.from_url(url)
r.flushall()
q = Queue("q", Exchange("q"), routing_key="q")
w0 = Connection(url, transport_options=opts)
w1 = Connection(url, transport_options=opts)
w0.SimpleQueue(q).put("job")
m0 = q(w0.default_channel).get(no_ack=False)          # worker 0 takes the job
time.sleep(0.3)                                       # past the visibility timeout
w1.default_channel.qos.restore_visible(interval=1)    # what a worker's loop runs
m1 = q(w1.default_channel).get(no_ack=False)          # worker 1 takes it again
print("same delivery_tag:", m0.delivery_tag == m1.delivery_tag)
print("unacked before the stale ack:", r.hlen("kstale:unacked"))
m0.ack()                                              # worker 0, stale, acks
print("unacked after the stale ack:", r.hlen("kstale:unacked"))
time.sleep(0.3)                                       # worker 1 dies holding it
w0.default_channel.qos.restore_visible(interval=1)
print("queue length after restore_visible:", r.llen("kstale:q"),
      "unacked:", r.hlen("kstale:unacked"))
