<?php
// Asks through nlproxy with PHP PDO (pdo_pgsql), with emulated and native
// prepares, outside and inside a transaction.
//
// Usage: php ask_client.php DSN USER PASSWORD TOPIC
// Prints, per mode (emulated, native), "MODE plain: 42", one
// "MODE FORM: cols=a,b rows=1,x;2,y" line per ask form, the same for a
// statement prepared twice, and "MODE tx: kept=1" for the reported data-loss
// case (beginTransaction; CREATE TEMP TABLE; ask; INSERT; commit).

function show($label, $st) {
    $cols = [];
    for ($i = 0; $i < $st->columnCount(); $i++) {
        $cols[] = $st->getColumnMeta($i)['name'];
    }
    $rows = [];
    foreach ($st->fetchAll(PDO::FETCH_NUM) as $r) {
        $rows[] = implode(',', $r);
    }
    echo "$label: cols=" . implode(',', $cols) . " rows=" . implode(';', $rows) . "\n";
}

[$_, $dsn, $user, $pass, $topic] = $argv;
$pdo = new PDO($dsn, $user, $pass, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
foreach (['emulated' => true, 'native' => false] as $mode => $emulate) {
    $pdo->setAttribute(PDO::ATTR_EMULATE_PREPARES, $emulate);
    echo "$mode plain: " . $pdo->query('SELECT 40 + 2')->fetchColumn() . "\n";
    $forms = [
        'comment' => "/* ask: $topic via php $mode comment */",
        'dash' => "-- ask: $topic via php $mode dash",
        'bare' => "ASK $topic via php $mode bare;",
        'func' => "SELECT * FROM nlproxy.ask('$topic via php $mode func')",
    ];
    foreach ($forms as $form => $sql) {
        $st = $pdo->query($sql);
        show("$mode $form", $st);
        $st = null; // native: PDO deallocates the statement now
    }
    for ($i = 1; $i <= 2; $i++) {
        $st = $pdo->prepare("-- ask: $topic via php $mode prepared");
        $st->execute();
        show("$mode prepared $i", $st);
        $st = null;
    }
    $pdo->beginTransaction();
    $pdo->exec("CREATE TEMP TABLE php_$mode (x int)");
    $st = $pdo->query("/* ask: $topic via php $mode in a transaction */");
    show("$mode in tx", $st);
    $st = null;
    $pdo->exec("INSERT INTO php_$mode VALUES (1)");
    $pdo->commit();
    echo "$mode tx: kept=" . $pdo->query("SELECT count(*) FROM php_$mode")->fetchColumn() . "\n";
}
