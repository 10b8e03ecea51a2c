#!/bin/sh
# run history layouts: 100,000 entries (the default retention) and 1,000,000; 18-byte keys; cut record 13 B
cd "$(dirname "$0")"
M=./mem/mem
C='hash-max-listpack-entries 128'
$M -layout H0 -n 100000 -cfg "$C"
$M -layout H1 -n 100000 -nb 96 -cfg "$C"
$M -layout H3 -n 100000 -nb 96 -cfg "$C"
$M -layout H2 -n 100000 -nb 96 -cfg "$C"
$M -layout H0 -n 1000000 -cfg "$C"
$M -layout H1 -n 1000000 -nb 1024 -cfg "$C"
$M -layout H3 -n 1000000 -nb 1024 -cfg "$C"
$M -layout H1 -n 100000 -nb 96 -errlen 40 -cfg "$C"
$M -layout H1 -n 100000 -nb 96 -errlen 60 -cfg "$C"
