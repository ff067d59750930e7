# Parks Ruby threads in known stacks for rewind's tests. Each thread
# writes its own caller_locations(0), taken on the line it parks on, to
# the report file ARGV[0]: "THREAD <native thread id>" then
# "label<TAB>path<TAB>line" a frame. ARGV[1] more threads recurse 20
# deep. Once every other thread sleeps, the main thread writes END,
# prints "ready" and parks reading stdin (rb_a -> rb_b -> rb_c).
$rep = File.open(ARGV[0], "w")
$m = Mutex.new
$q = Thread::Queue.new
$done = Thread::Queue.new
def report(locs) = $m.synchronize { $rep.puts "THREAD #{Thread.current.native_thread_id}", locs.map { |l| "#{l.label}\t#{l.path}\t#{l.lineno}" } ; $rep.flush; $done << 1 }
def rec(n) = n == 0 ? (report(caller_locations(0)); $q.pop) : rec(n - 1)
class Foo
  def self.cm = (report(caller_locations(0)); $q.pop)
  define_method(:dm) { (report(caller_locations(0)); $q.pop) }
end
# long's line table is longer than the succinct index's immediate part.
def long
  x = 0
  x += 1
  x += 2
  x += 3
  x += 4
  x += 5
  x += 6
  x += 7
  x += 8
  x += 9
  x += 10
  x += 11
  x += 12
  x += 13
  x += 14
  x += 15
  x += 16
  x += 17
  x += 18
  x += 19
  x += 20
  x += 21
  x += 22
  x += 23
  x += 24
  x += 25
  x += 26
  x += 27
  x += 28
  x += 29
  x += 30
  x += 31
  x += 32
  x += 33
  x += 34
  x += 35
  x += 36
  x += 37
  x += 38
  x += 39
  x += 40
  report(caller_locations(0)); $q.pop
end
pr = Proc.new { report(caller_locations(0)); $q.pop }
threads = [
  Thread.new { rec(4) },
  Thread.new { [1, 2].each { |x| report(caller_locations(0)); $q.pop } },
  Thread.new { Foo.new.dm },
  Thread.new { pr.call },
  Thread.new { Foo.cm },
  Thread.new { long },
]
Integer(ARGV[1] || 0).times { threads << Thread.new { rec(20) } }
# Each thread has reported (and goes on to its $q.pop) when its report
# is in: then "sleep" is that wait, not the report's Mutex.
threads.size.times { $done.pop }
Thread.pass until threads.all? { |t| t.status == "sleep" }
def rb_c = (report(caller_locations(0)); $rep.puts "END"; $rep.close; puts "ready"; $stdout.flush; $stdin.gets)
def rb_b = rb_c
def rb_a = rb_b
rb_a
