<?php
// Unpaid orders cancelled after a delay unless paid: a PHP shop talking
// to wheelq-server over HTTP (php-cli with curl; nothing else).
//
//   WHEELQ_URL=http://127.0.0.1:8780 WHEELQ_TOKEN=wq_... php orders.php
//
// against a server that pulls its topic: wheelq-server ... -pull orders.expire
//
// It places two orders, each with an expiry job ("orders.expire", its id
// the order's), pays the second (cancelling its expiry), then, as the
// shop's expiry worker, reserves the expiries that come due and cancels
// those orders. Only the unpaid one expires.

$base = getenv('WHEELQ_URL') ?: 'http://127.0.0.1:8780';
$token = getenv('WHEELQ_TOKEN') ?: '';
$delayMs = (float)(getenv('ORDER_TTL_MS') ?: 800);

function wq(string $method, string $path, ?array $body = null): array {
    global $base, $token;
    $ch = curl_init($base . $path);
    $headers = ['Content-Type: application/json'];
    if ($token !== '') {
        $headers[] = 'Authorization: Bearer ' . $token;
    }
    curl_setopt_array($ch, [
        CURLOPT_CUSTOMREQUEST => $method,
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_HTTPHEADER => $headers,
        CURLOPT_TIMEOUT => 70,
    ]);
    if ($body !== null) {
        curl_setopt($ch, CURLOPT_POSTFIELDS, json_encode($body));
    }
    $raw = curl_exec($ch);
    if ($raw === false) {
        throw new RuntimeException('wheelq: ' . curl_error($ch));
    }
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    $data = $raw === '' ? [] : json_decode($raw, true);
    if ($status >= 400) {
        // Every error has a stable code: duplicate, not_found, running, ...
        throw new RuntimeException("wheelq: $status {$data['error']['code']}: {$data['error']['message']}");
    }
    return $data;
}

$orders = ['1001' => 'unpaid', '1002' => 'paid'];
foreach ($orders as $id => $_) {
    // (string): PHP turns numeric array keys into ints; ids are strings.
    wq('POST', '/v1/jobs/orders.expire', ['id' => (string)$id, 'payload' => json_encode(['order' => $id]), 'delay_ms' => $delayMs]);
    echo "placed $id, expires in {$delayMs} ms\n";
}
// Scheduling the same order again is refused: ids are the caller's.
try {
    wq('POST', '/v1/jobs/orders.expire', ['id' => '1001', 'delay_ms' => $delayMs]);
} catch (RuntimeException $e) {
    echo "again 1001: " . (str_contains($e->getMessage(), 'duplicate') ? 'duplicate' : $e->getMessage()) . "\n";
}
wq('DELETE', '/v1/jobs/orders.expire/1002');
echo "paid 1002: expiry cancelled\n";

// The expiry worker: waits for due expiries (a long poll), cancels the
// order, acks.
$deadline = microtime(true) + 30;
$expired = 0;
while ($expired < 1 && microtime(true) < $deadline) {
    $got = wq('POST', '/v1/reserve', ['topics' => ['orders.expire'], 'max' => 10, 'wait_ms' => 2000, 'ttr_ms' => 30000]);
    foreach ($got['jobs'] as $job) {
        $order = json_decode($job['payload'], true)['order'];
        echo "expired $order (attempt {$job['attempt']})\n";
        wq('POST', "/v1/jobs/orders.expire/{$job['id']}/ack", ['token' => $job['token']]);
        $expired++;
    }
}
$state = wq('GET', '/v1/jobs/orders.expire/1001')['state'];
echo "1001 is $state\n";
