"""Dramatiq 2.2.1's RedisBroker alone (no ackgap, no worker loop): a fetch
whose reply is lost (the script ran; the connection drops before the reply
arrives) leaves the message in the fetching broker's acks set. While that
broker heartbeats (every later fetch does), maintenance never gives it back;
it comes back only once that broker stops. Usage: python lost_fetch.py PORT"""
import sys, time
import redis
from dramatiq import Message
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker

class LosesOneFetchReply(redis.Connection):
    armed = False
    def send_packed_command(self, command, *a, **k):
        data = b"".join(command) if isinstance(command, list) else command
        self.lose = LosesOneFetchReply.armed and b"fetch" in data
        return super().send_packed_command(command, *a, **k)
    def read_response(self, *a, **k):
        reply = super().read_response(*a, **k)
        if getattr(self, "lose", False):
            LosesOneFetchReply.armed = self.lose = False
            self.disconnect()                      # the reply is read and lost
            raise redis.ConnectionError("reply lost")
        return reply

port = int(sys.argv[1])
pool = redis.ConnectionPool(port=port, connection_class=LosesOneFetchReply)
a = RedisBroker(client=redis.Redis(connection_pool=pool), middleware=[], heartbeat_timeout=1000, maintenance_chance=0)
b = RedisBroker(port=port, middleware=[], heartbeat_timeout=1000, maintenance_chance=MAINTENANCE_SCALE)
a.client.flushall()
for broker in (a, b):
    broker.declare_queue("jobs")
sent = a.enqueue(Message(queue_name="jobs", actor_name="job", args=(), kwargs={}, options={}))
LosesOneFetchReply.armed = True
try:
    next(a.consume("jobs", prefetch=1, timeout=100))
except Exception as e:                             # ConsumerThread logs it and restarts its consumer
    print("A's fetch:", type(e).__name__, e)
print("A's acks set:", a.client.scard(f"dramatiq:__acks__.{a.broker_id}.jobs"), "queue:", a.client.llen("dramatiq:jobs"))
t0 = time.time()
ca, cb = a.consume("jobs", prefetch=1, timeout=100), b.consume("jobs", prefetch=1, timeout=100)
while time.time() - t0 < 5:                        # A lives (its consumer restarted), B does maintenance
    assert next(ca) is None
    got = next(cb)
    assert got is None, got
print(f"B, with maintenance on every call: nothing in {time.time() - t0:.0f} s while A heartbeats")
t1 = time.time()                                   # A stops (its process dies)
while (got := next(cb)) is None:
    pass
print(f"B got it (same message: {got.message_id == sent.message_id}) {time.time() - t1:.1f} s after A stopped")
