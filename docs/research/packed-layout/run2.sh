#!/bin/sh
# as stated in the brief: hash-max-listpack-entries 128 set explicitly (Redis 7.0's real default is 512)
cd "$(dirname "$0")"
M=./mem/mem
C='hash-max-listpack-entries 128'
$M -layout D -nb 1024 -cfg "$C"
$M -layout D -nb 1536 -cfg "$C"
$M -layout D -nb 2048 -cfg "$C"
$M -layout D -nb 2048 -cfg "$C" -idlen 12
$M -layout A -nb 2048 -cfg "$C"
$M -layout B -nb 1024 -cfg "$C"
$M -layout L -nb 1024 -cfg "$C"
$M -layout base -cfg "$C"
# raising the limits for the best candidate (D): records inline (value 128), bigger buckets (entries 512/1024)
$M -layout Di -nb 2048 -cfg 'hash-max-listpack-value 128,hash-max-listpack-entries 128'
$M -layout Di -nb 512 -cfg 'hash-max-listpack-value 128,hash-max-listpack-entries 512'
$M -layout D -nb 512 -cfg 'hash-max-listpack-entries 512'
$M -layout D -nb 256 -cfg 'hash-max-listpack-entries 1024'
$M -layout inline -nb 1024 -cfg 'hash-max-listpack-value 128'
