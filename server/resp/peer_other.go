//go:build !linux

package resp

import "net"

// peerWatch does not watch outside Linux: a client that goes away while
// blocked is found when its reply is written.
type peerWatch struct{}

func watchPeer(net.Conn, func()) *peerWatch { return &peerWatch{} }

// Went says whether the peer went: never known here.
func (*peerWatch) Went() bool { return false }

// Watching says whether a watch runs: never here.
func (*peerWatch) Watching() bool { return false }

// Stop ends the watch: nothing to end here.
func (*peerWatch) Stop() bool { return false }
