package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
)

// ErrLogDown is the log refusing a record: nothing was appended.
var ErrLogDown = errors.New("message log unavailable: nothing was published")

// ErrRebalanced is a commit from a consumer session that no longer owns the
// topic: a newer session of its group joined (after a crash, a restart, a
// rebalance). Its offsets are not committed; the new session redelivers.
var ErrRebalanced = errors.New("the group was rebalanced: this session may not commit")

// Record is one event in the log.
type Record struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	// ID is the event's id, stable across redeliveries and republications:
	// the consumer's idempotency key (the article's eventId).
	ID string `json:"id"`
	// TransferID is the simulator's oracle, as in Message.
	TransferID int64  `json:"transferId"`
	Value      []byte `json:"value"`
}

// Log is the message log standing in for the article's Kafka, in process:
// topics split into partitions, a record's key choosing its partition so
// that records with one key stay in order, at-least-once delivery to
// consumer groups, and offsets committed by the consumer separately from its
// processing. A session that dies without committing leaves its group's
// offsets where they were, and the next session is delivered everything
// after them again: exactly what an offset not committed implies.
type Log struct {
	mu         sync.Mutex
	partitions int
	topics     map[string][][]Record
	committed  map[groupPartition]int64
	generation map[string]int // group/topic → the newest session
	down       bool
}

type groupPartition struct {
	group, topic string
	partition    int
}

// NewLog returns an empty log whose topics have partitions partitions.
func NewLog(partitions int) *Log {
	if partitions < 1 {
		partitions = 1
	}
	return &Log{partitions: partitions, topics: map[string][][]Record{},
		committed: map[groupPartition]int64{}, generation: map[string]int{}}
}

// SetDown makes the log refuse every publication (true) or accept them.
func (l *Log) SetDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
}

// PartitionOf is the partition a key's records go to.
func (l *Log) PartitionOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(l.partitions))
}

// Publish appends a record to topic, in the partition of its key, and
// returns it with its offset. Publishing the same id twice appends it twice:
// the log does not deduplicate, consumers do.
func (l *Log) Publish(ctx context.Context, topic, key, id string, transferID int64, value []byte) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return Record{}, ErrLogDown
	}
	parts := l.topic(topic)
	p := l.PartitionOf(key)
	r := Record{Topic: topic, Partition: p, Offset: int64(len(parts[p])), Key: key, ID: id,
		TransferID: transferID, Value: append([]byte(nil), value...)}
	parts[p] = append(parts[p], r)
	return r, nil
}

func (l *Log) topic(name string) [][]Record {
	parts, ok := l.topics[name]
	if !ok {
		parts = make([][]Record, l.partitions)
		l.topics[name] = parts
	}
	return parts
}

// Records returns every record of topic, partition by partition, each in
// offset order.
func (l *Log) Records(topic string) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for _, part := range l.topics[topic] {
		out = append(out, part...)
	}
	return out
}

// Committed returns group's committed offset in each partition of topic:
// the offset of the next record the group will be delivered.
func (l *Log) Committed(group, topic string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, l.partitions)
	for p := range out {
		out[p] = l.committed[groupPartition{group, topic, p}]
	}
	return out
}

// Session is one consumer process of a group reading a topic: it is
// delivered the records after its group's committed offsets, and commits
// offsets as it finishes records. Joining makes every older session of the
// group a zombie: it may still hold records, but its commits are refused.
type Session struct {
	log          *Log
	group, topic string
	gen          int
	pos          []int64
}

// Join starts a new session of group on topic, at the group's committed
// offsets.
func (l *Log) Join(group, topic string) *Session {
	l.mu.Lock()
	defer l.mu.Unlock()
	gt := group + "\x00" + topic
	l.generation[gt]++
	s := &Session{log: l, group: group, topic: topic, gen: l.generation[gt], pos: make([]int64, l.partitions)}
	for p := range s.pos {
		s.pos[p] = l.committed[groupPartition{group, topic, p}]
	}
	l.topic(topic)
	return s
}

// Poll returns up to max records the session has not been delivered yet,
// taking from each partition in order, and moves the session's position
// past them. The group's committed offsets do not move.
func (s *Session) Poll(max int) []Record {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	parts := l.topic(s.topic)
	var out []Record
	for more := true; more && len(out) < max; {
		more = false
		for p := range parts {
			if len(out) >= max {
				break
			}
			if s.pos[p] < int64(len(parts[p])) {
				out = append(out, parts[p][s.pos[p]])
				s.pos[p]++
				more = true
			}
		}
	}
	return out
}

// Commit records that the group is done with r and every record before it
// in r's partition: a later session starts after it. Offsets never move
// back. A session that is no longer its group's newest gets ErrRebalanced.
func (s *Session) Commit(r Record) error {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Topic != s.topic {
		return fmt.Errorf("commit: record of topic %q in a session of %q", r.Topic, s.topic)
	}
	if l.generation[s.group+"\x00"+s.topic] != s.gen {
		return ErrRebalanced
	}
	gp := groupPartition{s.group, s.topic, r.Partition}
	if r.Offset+1 > l.committed[gp] {
		l.committed[gp] = r.Offset + 1
	}
	return nil
}
