package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// swarm is many simulated workers on a few shared NATS connections: each
// speaks the worker protocol (announce, offers, start and periodic
// heartbeats, batched results, discover) with a few hundred bytes of state
// and no goroutine of its own, so that ten thousand fit in one process
// beside the stack. A simulated job runs the "sleep" payload's ms.
//
// It measures what a fleet sees: heartbeat round trips, fenced leases (no
// acknowledged heartbeat for fenceAfter: the real worker stops the run),
// leases the schedulers answered lost, and offers taken.
type swarm struct {
	conns      []*nats.Conn
	js         []jetstream.JetStream
	interval   time.Duration
	fenceAfter time.Duration
	kinds      []string

	// workers is every worker joined so far; join replaces the slice.
	workers atomic.Pointer[[]*simWorker]

	rttMu sync.Mutex
	rtts  []time.Duration

	fenced, lost, accepted, busy, completed, hbErrors atomic.Int64

	results chan simResult // finished runs' results, waiting for a batch
	wg      sync.WaitGroup
	stop    chan struct{}
}

// simWorker is one simulated worker.
type simWorker struct {
	id    string
	conn  int
	slots int

	mu     sync.Mutex
	leases map[string]*simLease // by job id
}

// simResult is one finished run's result, encoded, and its worker.
type simResult struct {
	worker string
	data   []byte
}

// simLease is one run a simulated worker holds.
type simLease struct {
	lease   contracts.Lease
	acked   time.Time // last acknowledged heartbeat (the offer's answer counts)
	started bool      // the start heartbeat was acknowledged
	runFor  time.Duration
	timer   *time.Timer
}

// newSwarm connects conns connections to url.
func newSwarm(url string, conns int, interval, fenceAfter time.Duration) (*swarm, error) {
	s := &swarm{interval: interval, fenceAfter: fenceAfter, kinds: []string{"sleep"},
		results: make(chan simResult, 1<<16), stop: make(chan struct{})}
	for i := range conns {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("swarm-%d", i)), nats.ReconnectBufSize(64<<20))
		if err != nil {
			s.close()
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, nc)
		s.js = append(s.js, js)
	}
	for i := range conns {
		s.wg.Go(func() { s.deliverResults(i) })
	}
	s.wg.Go(s.heartbeatLoop)
	s.wg.Go(s.announceLoop)
	return s, nil
}

// join adds n workers of slots slots each, all within about spread: each
// subscribes to its offers and announces itself.
func (s *swarm) join(n, slots int, spread time.Duration) error {
	added, err := s.subscribe(n, slots)
	if err != nil {
		return err
	}
	s.announceAll(added, spread)
	return nil
}

// subscribe makes n workers of slots slots each and subscribes each to
// its offers, without announcing them.
func (s *swarm) subscribe(n, slots int) ([]*simWorker, error) {
	first := len(s.workersSnapshot())
	added := make([]*simWorker, 0, n)
	for i := range n {
		w := &simWorker{id: fmt.Sprintf("sw-%05d", first+i+1), conn: (first + i) % len(s.conns), slots: slots,
			leases: map[string]*simLease{}}
		nc := s.conns[w.conn]
		if _, err := nc.Subscribe(contracts.WorkerOfferSubject(w.id), func(m *nats.Msg) { s.offer(w, m) }); err != nil {
			return nil, err
		}
		added = append(added, w)
	}
	for _, nc := range s.conns {
		if err := nc.Flush(); err != nil {
			return nil, err
		}
	}
	return added, nil
}

// announceAll announces the workers added, spread over spread, and from
// then on keeps them announcing and heartbeating.
func (s *swarm) announceAll(added []*simWorker, spread time.Duration) {
	// Encoded first: the simulated fleet shares the stack's cores, and
	// its own work is not what the join measures.
	msgs := make([][]byte, len(added))
	for i, w := range added {
		msgs[i] = s.announcement(w)
	}
	n := len(added)
	step := spread / time.Duration(max(n, 1))
	start := time.Now()
	for i, w := range added {
		_ = s.conns[w.conn].Publish(contracts.AnnounceSubject(w.id), msgs[i])
		if step > 0 {
			if d := time.Until(start.Add(time.Duration(i) * step)); d > 0 {
				time.Sleep(d)
			}
		}
	}
	// From now on they announce every interval and heartbeat, as a real
	// worker does after its first announcement.
	all := append(s.workersSnapshot(), added...)
	s.workers.Store(&all)
}

// announce publishes w's state.
func (s *swarm) announce(w *simWorker) {
	_ = s.conns[w.conn].Publish(contracts.AnnounceSubject(w.id), s.announcement(w))
}

// announcement is w's state as an Announce.
func (s *swarm) announcement(w *simWorker) []byte {
	w.mu.Lock()
	inFlight := len(w.leases)
	w.mu.Unlock()
	b, _ := json.Marshal(contracts.Announce{WorkerID: w.id, Kinds: s.kinds, Capacity: w.slots, InFlight: inFlight,
		IntervalMS: s.interval.Milliseconds()})
	return b
}

// announceLoop announces every worker once per interval, spread evenly,
// as real workers do.
func (s *swarm) announceLoop() {
	s.spreadLoop(func(w *simWorker) { s.announce(w) })
}

// heartbeatLoop sends each worker's heartbeat once per interval, spread
// evenly, after dropping the leases whose last acknowledgement is older
// than fenceAfter (a real worker fences itself and stops them).
func (s *swarm) heartbeatLoop() {
	s.spreadLoop(func(w *simWorker) {
		now := time.Now()
		var leases []contracts.Lease
		w.mu.Lock()
		for id, l := range w.leases {
			if now.Sub(l.acked) > s.fenceAfter {
				s.fenced.Add(1)
				if l.timer != nil {
					l.timer.Stop()
				}
				delete(w.leases, id)
				continue
			}
			if l.started {
				leases = append(leases, l.lease)
			}
		}
		w.mu.Unlock()
		if len(leases) > 0 {
			s.heartbeat(w, leases, false)
		}
	})
}

// spreadLoop calls fn for every worker once per interval, in 50 steps.
func (s *swarm) spreadLoop(fn func(*simWorker)) {
	const steps = 50
	t := time.NewTicker(s.interval / steps)
	defer t.Stop()
	for step := 0; ; step = (step + 1) % steps {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ws := s.workersSnapshot()
		for i := step; i < len(ws); i += steps {
			fn(ws[i])
		}
	}
}

// workersSnapshot is the workers joined so far.
func (s *swarm) workersSnapshot() []*simWorker {
	if p := s.workers.Load(); p != nil {
		return *p
	}
	return nil
}

// offer answers an Offer or OfferBatch: a job per free slot, busy for the
// rest. Each accepted job's start heartbeat goes out at once.
func (s *swarm) offer(w *simWorker, m *nats.Msg) {
	jobs, batch, err := contracts.DecodeOffers(m.Data)
	if err != nil {
		_ = m.Respond([]byte(`{"status":"refused","reason":"malformed"}`))
		return
	}
	now := time.Now()
	reply := contracts.OfferReply{Status: contracts.OfferBusy, WorkerID: w.id, Capacity: w.slots}
	var started []contracts.Lease
	w.mu.Lock()
	for _, j := range jobs {
		st := contracts.OfferBusy
		if len(w.leases) < w.slots && !slices.Contains(s.kinds, j.Kind) {
			st = contracts.OfferRefused
		} else if len(w.leases) < w.slots {
			st = contracts.OfferAccepted
			l := &simLease{lease: contracts.Lease{JobID: j.ID, Claim: j.Claim}, acked: now, runFor: sleepOf(j.Payload)}
			w.leases[j.ID] = l
			started = append(started, l.lease)
			reply.Status = contracts.OfferAccepted
		}
		if batch {
			reply.Results = append(reply.Results, contracts.OfferResult{JobID: j.ID, Claim: j.Claim, Status: st})
		} else if st == contracts.OfferRefused {
			reply.Status = st
		}
		if st == contracts.OfferAccepted {
			s.accepted.Add(1)
		} else {
			s.busy.Add(1)
		}
	}
	reply.InFlight = len(w.leases)
	w.mu.Unlock()
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
	if len(started) > 0 {
		s.heartbeat(w, started, true)
	}
}

// sleepOf is a sleep payload's duration.
func sleepOf(p json.RawMessage) time.Duration {
	var v struct {
		MS int `json:"ms"`
	}
	_ = json.Unmarshal(p, &v)
	return time.Duration(v.MS) * time.Millisecond
}

// heartbeat sends w's heartbeat for leases and applies the answer: lost
// leases stop, the others are acknowledged (a start heartbeat's start the
// run).
func (s *swarm) heartbeat(w *simWorker, leases []contracts.Lease, start bool) {
	b, _ := json.Marshal(contracts.Heartbeat{WorkerID: w.id, Leases: leases})
	nc := s.conns[w.conn]
	s.wg.Go(func() {
		sent := time.Now()
		msg, err := nc.Request(contracts.HeartbeatSubject(w.id), b, 10*time.Second)
		rtt := time.Since(sent)
		if err != nil {
			s.hbErrors.Add(1)
			return
		}
		ack, err := contracts.DecodeHeartbeatAck(msg.Data)
		if err != nil || ack.Error != "" {
			s.hbErrors.Add(1)
			return
		}
		s.rttMu.Lock()
		s.rtts = append(s.rtts, rtt)
		s.rttMu.Unlock()
		lost := map[string]bool{}
		for _, l := range ack.Lost {
			lost[l.JobID] = true
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range leases {
			cur := w.leases[l.JobID]
			if cur == nil || cur.lease.Claim != l.Claim {
				continue
			}
			if lost[l.JobID] {
				s.lost.Add(1)
				if cur.timer != nil {
					cur.timer.Stop()
				}
				delete(w.leases, l.JobID)
				continue
			}
			cur.acked = sent
			if start && !cur.started {
				cur.started = true
				cur.timer = time.AfterFunc(cur.runFor, func() { s.finish(w, cur) })
			}
		}
	})
}

// finish ends a run: the lease goes, its result waits for the next batch.
func (s *swarm) finish(w *simWorker, l *simLease) {
	w.mu.Lock()
	if w.leases[l.lease.JobID] != l {
		w.mu.Unlock()
		return
	}
	delete(w.leases, l.lease.JobID)
	w.mu.Unlock()
	b, _ := json.Marshal(contracts.Result{JobID: l.lease.JobID, Claim: l.lease.Claim, WorkerID: w.id,
		State: contracts.StateSucceeded})
	s.results <- simResult{worker: w.id, data: b}
	s.completed.Add(1)
	s.announce(w) // a free slot: tell the schedulers, as a real worker does
}

// deliverResults publishes the results waiting, up to 256 at a time, as
// soon as one is: each worker's together, as one message on its own
// result subject (as a real worker batches its own), all of them in
// flight at once on connection conn.
func (s *swarm) deliverResults(conn int) {
	var batch []simResult
	flush := func() {
		if len(batch) == 0 {
			return
		}
		byWorker := map[string][][]byte{}
		var order []string
		for _, r := range batch {
			if _, seen := byWorker[r.worker]; !seen {
				order = append(order, r.worker)
			}
			byWorker[r.worker] = append(byWorker[r.worker], r.data)
		}
		stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
		msgs := make([]bus.Message, len(order))
		for i, w := range order {
			msgs[i] = bus.Message{Subject: contracts.ResultSubject(w), Data: contracts.EncodeResultBatch(byWorker[w]),
				ID: "swarm-" + strconv.Itoa(conn) + "-" + stamp + "-" + strconv.Itoa(i)}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for ctx.Err() == nil && len(msgs) > 0 {
			errs := bus.PublishAll(ctx, s.js[conn], msgs)
			var again []bus.Message
			for i, err := range errs {
				if err != nil {
					again = append(again, msgs[i])
				}
			}
			if msgs = again; len(msgs) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case <-s.stop:
			return
		case r := <-s.results:
			// Any connection may carry any worker's results.
			batch = append(batch, r)
		more:
			for len(batch) < 256 {
				select {
				case r := <-s.results:
					batch = append(batch, r)
				default:
					break more
				}
			}
			flush()
		}
	}
}

// rttQuantile is a quantile of the heartbeat round trips so far.
func (s *swarm) rttQuantile(q float64) time.Duration {
	s.rttMu.Lock()
	defer s.rttMu.Unlock()
	return quantile(s.rtts, q)
}

// quantile of ds (sorted in place); 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// close stops the loops and closes the connections.
func (s *swarm) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	s.wg.Wait()
}
