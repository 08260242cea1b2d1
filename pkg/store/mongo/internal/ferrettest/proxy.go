package ferrettest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The MongoDB wire protocol, as much as the proxy needs of it: every
// message starts with a 16-byte header (int32 messageLength, requestID,
// responseTo, opCode, all little-endian), and an OP_MSG continues with
// int32 flagBits.
const (
	headerLen   = 16
	opMsg       = 2013
	moreToCome  = 1 << 1
	maxMsgLen   = 48 << 20 // the server's maxMessageSizeBytes
	replyWithin = 30 * time.Second
)

// proxy forwards MongoDB wire messages from its clients to one server,
// one command at a time: a global mutex is held from forwarding a request
// until its reply has been read back. Each client connection gets its own
// upstream connection, so the server still sees as many connections as the
// driver opens.
type proxy struct {
	ln       net.Listener
	upstream string
	gate     sync.Mutex // one command in flight

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	fault  FaultFunc // nil: every command passes
	held   [][]byte  // commands Hold kept back, in order
}

// startProxy listens on a free loopback port and forwards to upstream.
func startProxy(upstream string) (*proxy, error) {
	return startProxyOn("127.0.0.1:0", upstream)
}

// startProxyOn listens on listen (host:port) and forwards to upstream.
func startProxyOn(listen, upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// track remembers c so close can close it; false when the proxy is closing.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
			if err != nil {
				return
			}
			if !p.track(up) {
				_ = up.Close()
				return
			}
			defer p.untrack(up)
			_ = p.serve(c, up)
		}()
	}
}

// serve forwards client's requests to up until either side closes.
func (p *proxy) serve(client, up net.Conn) error {
	for {
		req, err := readMessage(client)
		if err != nil {
			return err
		}
		if err := p.roundTrip(req, client, up); err != nil {
			return err
		}
	}
}

// roundTrip sends one request upstream and, unless it says moreToCome,
// copies its reply back, all while holding the gate. A fault set with
// SetFault may hold the request back or lose its reply instead.
func (p *proxy) roundTrip(req []byte, client, up net.Conn) error {
	p.gate.Lock()
	defer p.gate.Unlock()
	f := p.decide(req)
	if f == Hold {
		return errors.New("request held back")
	}
	reply, err := exchange(req, up)
	if err != nil || reply == nil {
		return err
	}
	if f == LoseReply {
		return errors.New("reply lost")
	}
	if _, err := client.Write(reply); err != nil {
		return fmt.Errorf("forward reply: %w", err)
	}
	return nil
}

// decide asks the fault set with SetFault, if any, what to do with req,
// and keeps req back when the answer is Hold.
func (p *proxy) decide(req []byte) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault == nil {
		return Pass
	}
	f := p.fault(req)
	if f == Hold {
		p.held = append(p.held, req)
	}
	return f
}

// exchange writes req to up and reads its reply, or returns a nil reply
// when req says moreToCome. The caller holds the gate.
func exchange(req []byte, up net.Conn) ([]byte, error) {
	if _, err := up.Write(req); err != nil {
		return nil, fmt.Errorf("forward request: %w", err)
	}
	if !expectsReply(req) {
		return nil, nil
	}
	_ = up.SetReadDeadline(time.Now().Add(replyWithin))
	reply, err := readMessage(up)
	_ = up.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	return reply, nil
}

// readMessage reads one whole wire message: its header, then the rest of
// messageLength bytes.
func readMessage(r io.Reader) ([]byte, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.LittleEndian.Uint32(h[0:4])))
	if n < headerLen || n > maxMsgLen {
		return nil, fmt.Errorf("bad message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, h[:])
	if _, err := io.ReadFull(r, msg[headerLen:]); err != nil {
		return nil, errors.Join(errors.New("short message"), err)
	}
	return msg, nil
}

// expectsReply is false only for an OP_MSG with the moreToCome flag: the
// server answers every other request.
func expectsReply(msg []byte) bool {
	op := int32(binary.LittleEndian.Uint32(msg[12:16]))
	if op != opMsg || len(msg) < headerLen+4 {
		return true
	}
	flags := binary.LittleEndian.Uint32(msg[16:20])
	return flags&moreToCome == 0
}
