#!/bin/sh
# candidate sweep (issue 32): pending layouts at 1M jobs, 18-byte keys, 64-byte payloads
cd "$(dirname "$0")"
M=./mem/mem
$M -layout D -nb 1024
$M -layout D -nb 1536
$M -layout D -nb 2048
$M -layout D -nb 4096
$M -layout D -nb 2048 -idlen 12
$M -layout D -nb 2048 -n 100000
$M -layout D -nb 128 -n 100000
$M -layout A -nb 4096
$M -layout B -nb 1024
$M -layout L -nb 1024
$M -layout C -nb 2048 -tb 1s -spread 1h
$M -layout C -nb 2048 -tb 100ms -spread 1h
$M -layout C -nb 2048 -tb 1s -spread 24h
$M -layout C -nb 2048 -tb 1s -spread 10s
