$stdout.sync = true
# Run: ruby adapters/sidekiq/stuck-in-live-process.rb redis://127.0.0.1:PORT/  (FLUSHDB on that server!)
# Printed on Debian sidekiq 6.4.1 + gitlab-sidekiq-fetcher 0.8.0:
#   A fetched JOB-1 / B: nothing in 10 s while A lives / A killed (SIGKILL) / C fetched it 3.0 s after A died
# A job fetched by a live process whose acknowledge never happens (a failed
# LREM, a dead processor thread) is never fetched again while the process
# heartbeats: gitlab-sidekiq-fetcher's cleanup only takes dead identities' lists.
require "sidekiq"; require "sidekiq-reliable-fetch"
Redis.silence_deprecations = true
Sidekiq.logger.level = :warn
url = ARGV[0]
B = Sidekiq::BaseReliableFetch
B.send(:remove_const, :HEARTBEAT_INTERVAL); B.const_set(:HEARTBEAT_INTERVAL, 0.5)
B.send(:remove_const, :HEARTBEAT_LIFESPAN); B.const_set(:HEARTBEAT_LIFESPAN, 3)
Sidekiq::ReliableFetch.send(:remove_const, :RELIABLE_FETCH_IDLE_TIMEOUT); Sidekiq::ReliableFetch.const_set(:RELIABLE_FETCH_IDLE_TIMEOUT, 0)
def proc_fetcher(url) = (Sidekiq.redis = { url: url }; Sidekiq::ReliableFetch.new(queues: ["default"], cleanup_interval: 1, lease_interval: 0))
Sidekiq.redis = { url: url }; Sidekiq.redis(&:flushdb)
Sidekiq::Client.push("class" => "X", "args" => [1], "jid" => "JOB-1")
r, w = IO.pipe
a = fork { f = proc_fetcher(url); B.heartbeat; B.start_heartbeat_thread; uow = f.retrieve_work; w.puts uow&.job ? "A fetched JOB-1" : "A got nothing"; sleep }  # A lives, never acks
puts r.gets
b = fork { f = proc_fetcher(url); B.heartbeat; B.start_heartbeat_thread
  20.times { |i| if (u = f.retrieve_work) then puts "B fetched it after #{i * 0.5} s"; exit!(0) end; sleep 0.5 }
  puts "B: nothing in 10 s while A lives"; exit!(0) }
Process.wait(b)
Process.kill(:KILL, a); Process.wait(a); puts "A killed (SIGKILL)"
c = fork { f = proc_fetcher(url); B.heartbeat; B.start_heartbeat_thread
  20.times { |i| if (u = f.retrieve_work) then puts "C fetched it #{i * 0.5} s after A died"; exit!(0) end; sleep 0.5 }
  puts "C: nothing in 10 s"; exit!(0) }
Process.wait(c)
