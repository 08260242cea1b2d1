package ferrettest

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fault is what the proxy does with one command instead of passing it.
type Fault int

const (
	// Pass forwards the command and its reply.
	Pass Fault = iota
	// LoseReply forwards the command (the server applies it), then cuts
	// the client's connection instead of answering: a reply lost on the
	// way back, as when the server or the network dies right after a
	// write.
	LoseReply
	// Hold cuts the client's connection without forwarding the command,
	// and keeps it until Server.ReleaseHeld forwards it: a command the
	// client gave up on that still reaches the server later (a queue, a
	// slow network, a server that runs it after the client left).
	Hold
)

// FaultFunc decides the fate of one request, given its whole wire message
// (Command decodes its command document).
type FaultFunc func(msg []byte) Fault

// Command is the command document of an OP_MSG (its body section), or nil
// for any other message. Document sequences (the statements of a batched
// insert or update) follow it in msg.
func Command(msg []byte) bson.Raw {
	const body = headerLen + 4
	if len(msg) < body+5 || int32(binary.LittleEndian.Uint32(msg[12:16])) != opMsg || msg[body] != 0 {
		return nil
	}
	n := int(int32(binary.LittleEndian.Uint32(msg[body+1 : body+5])))
	if n < 5 || body+1+n > len(msg) {
		return nil
	}
	return bson.Raw(msg[body+1 : body+1+n])
}

// SetFault makes the proxy ask f what to do with every command from now on;
// nil passes them all again.
func (s *Server) SetFault(f FaultFunc) {
	s.proxy.mu.Lock()
	s.proxy.fault = f
	s.proxy.mu.Unlock()
}

// ReleaseHeld forwards the commands Hold kept back, in order, each on a
// connection of its own, one at a time like any other command, and
// returns how many it forwarded. Their replies are dropped (their clients
// are gone).
func (s *Server) ReleaseHeld() (int, error) {
	p := s.proxy
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for i, req := range held {
		if err := p.forwardAlone(req); err != nil {
			return i, fmt.Errorf("ferrettest: forward held command %d: %w", i, err)
		}
	}
	return len(held), nil
}

// forwardAlone sends req upstream on a new connection under the gate and
// reads its reply.
func (p *proxy) forwardAlone(req []byte) error {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = up.Close() }()
	p.gate.Lock()
	defer p.gate.Unlock()
	_, err = exchange(req, up)
	return err
}
