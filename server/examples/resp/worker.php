<?php
// A producer and worker on wheelq-server's Redis protocol front end, with
// phpredis (Debian's php-redis): schedule, cancel, reserve with a block,
// nack, ack.
//
//   WHEELQ_RESP=127.0.0.1:8781 WHEELQ_TOKEN=wq_... php worker.php
//
// against a server that pulls its topic: wheelq-server ... -pull php
[$host, $port] = explode(':', getenv('WHEELQ_RESP') ?: '127.0.0.1:8781');
$r = new Redis();
$r->connect($host, (int)$port, 5.0);
$token = getenv('WHEELQ_TOKEN');
if ($token) {
    $r->auth($token);
}
echo "ping ", var_export($r->ping(), true), "\n";
$id = $r->rawCommand('WQ.SCHEDULE', 'php', 'order 1001', 'ID', '1001', 'DELAY', '150');
echo "scheduled $id\n";
$jobs = $r->rawCommand('WQ.RESERVE', 'BLOCK', '5000', 'TOPICS', 'php');
foreach ($jobs ?: [] as [$topic, $jid, $tok, $payload, $attempt, $due, $deadline]) {
    $ok = $r->rawCommand('WQ.ACK', $topic, $jid, $tok);
    echo "acked $jid ($payload) attempt $attempt: ", var_export($ok, true), "\n";
}
// A reminder that is no longer wanted: cancelled before its time.
$r->rawCommand('WQ.SCHEDULE', 'php', 'reminder', 'ID', '1002', 'DELAY', '3600000');
echo "cancel 1002: ", $r->rawCommand('WQ.CANCEL', 'php', '1002'), "\n";
// A job whose first run fails: nacked, retried at once, then acked.
$r->rawCommand('WQ.SCHEDULE', 'php', 'order 1003', 'ID', '1003', 'DELAY', '50');
for ($done = false; !$done;) {
    foreach ($r->rawCommand('WQ.RESERVE', 'BLOCK', '5000', 'TOPICS', 'php') ?: [] as [$topic, $jid, $tok, $payload, $attempt]) {
        if ($attempt == 1) {
            $r->rawCommand('WQ.NACK', $topic, $jid, $tok, 'RETRY', '0', 'ERROR', 'gateway timeout');
            echo "nacked $jid attempt $attempt\n";
        } else {
            $r->rawCommand('WQ.ACK', $topic, $jid, $tok);
            echo "acked $jid attempt $attempt\n";
            $done = true;
        }
    }
}
try {
    $r->rawCommand('WQ.CANCEL', 'php', 'missing');
} catch (RedisException $e) {
    // The error's first word is its code: NOTFOUND, DUPLICATE, RUNNING...
    echo "cancel missing: ", explode(' ', $e->getMessage())[0], "\n";
}
