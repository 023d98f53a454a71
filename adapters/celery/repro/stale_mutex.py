"""kombu 5.7.0's Redis transport alone (no Celery worker, no ackgap): a
restore_visible cut off from the server right after it took unacked_mutex
cannot release it; the mutex lives unacked_mutex_expire (300 s by default)
and every restore_visible until then skips, so a dead worker's message stays
in `unacked` past its visibility timeout. Usage: python stale_mutex.py PORT"""
import sys, time
import redis
from kombu import Connection, Exchange, Queue
from kombu.transport.redis import Channel

class CutAfterMutex(redis.Connection):
    state = "armed"                                 # armed -> cut -> healed
    def send_packed_command(self, command, *a, **k):
        if CutAfterMutex.state == "cut":
            raise redis.ConnectionError("network cut")
        return super().send_packed_command(command, *a, **k)
    def send_command(self, *args, **k):
        super().send_command(*args, **k)
        if CutAfterMutex.state == "armed" and args[0] == "SET" and b"unacked_mutex" in str(args[1]).encode():
            self.cut_next = True
    def read_response(self, *a, **k):
        reply = super().read_response(*a, **k)
        if getattr(self, "cut_next", False):        # the mutex is ours: the network goes
            self.cut_next, CutAfterMutex.state = False, "cut"
        return reply
Channel.connection_class = CutAfterMutex             # kombu's hook for redis-py's connection

url = f"redis://127.0.0.1:{sys.argv[1]}/0"
opts = {"global_keyprefix": "kmutex:", "visibility_timeout": 0.2}
r = redis.Redis.from_url(url)
r.flushall()
q = Queue("q", Exchange("q"), routing_key="q")
w0, reaper = Connection(url, transport_options=opts), Connection(url, transport_options=opts)
w0.SimpleQueue(q).put("job")
q(w0.default_channel).get(no_ack=False)              # worker 0 takes the job, then dies
time.sleep(0.3)                                      # past the visibility timeout
try:
    reaper.default_channel.qos.restore_visible(interval=1)
except redis.ConnectionError as e:
    print("restore_visible:", type(e).__name__, e)
CutAfterMutex.state = "healed"                       # the network is back
for _ in range(3):
    reaper.default_channel.qos.restore_visible(interval=1)   # a worker's loop, again
    time.sleep(1)
print("mutex TTL:", r.ttl("kmutex:unacked_mutex"), "s; queue length:", r.llen("kmutex:q"),
      "unacked:", r.hlen("kmutex:unacked"))
