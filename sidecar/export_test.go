package sidecar

// WaitParsed returns once the connection's parser has parsed every byte fed
// so far (for tests that look at the tap between feeds).
func (tc *TapConn) WaitParsed() { tc.handoff.drain() }
