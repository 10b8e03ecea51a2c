<?php
// A producer and worker on wheelq-server's Redis protocol front end, with
// phpredis (Debian's php-redis): schedule, reserve with a block, ack.
//
//   WHEELQ_RESP=127.0.0.1:8781 WHEELQ_TOKEN=wq_... php worker.php
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
try {
    $r->rawCommand('WQ.CANCEL', 'php', 'missing');
} catch (RedisException $e) {
    // The error's first word is its code: NOTFOUND, DUPLICATE, RUNNING...
    echo "cancel missing: ", explode(' ', $e->getMessage())[0], "\n";
}
