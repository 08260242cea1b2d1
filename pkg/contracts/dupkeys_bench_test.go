package contracts

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// The cost of decoding a submit body and a batch body, which the check of
// duplicate keys adds a pass to; printed, never asserted:
//
//	go test -run '^$' -bench 'Decode(Submit|Batch)Body|DuplicateKeyCheck' -benchmem ./pkg/contracts

// typicalSubmit is a submit body as a client sends it: an exec job with
// its argv and environment, a key, a priority and resources.
const typicalSubmit = `{"kind":"exec","payload":{"argv":["convert","in.png","-resize","50%","out.png"],` +
	`"env":{"LANG":"C.UTF-8","OMP_NUM_THREADS":"2"},"timeout":"2m"},"key":"report-42","priority":5,` +
	`"max_attempts":3,"resources":{"cpu":0.5,"memory":"512MiB"}}`

// batchBody is a batch of n jobs whose payloads hold records of about
// size bytes each.
func batchBody(n, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"index","key":"doc-%d","payload":{"doc":%d,"rows":[`, i, i)
		for r, w := 0, 0; w < size; r++ {
			if r > 0 {
				b.WriteByte(',')
			}
			row := fmt.Sprintf(`{"id":%d,"name":"row %d of doc %d","score":%d.5,"tags":["a","b\u00e9"],"ok":true}`, r, r, i, r)
			b.WriteString(row)
			w += len(row) + 1
		}
		b.WriteString(`]}}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkDecodeSubmitBody(b *testing.B) {
	data := []byte(typicalSubmit)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeSubmit(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeBatchBody decodes a 1 MiB batch of 1,000 jobs as the
// gateway does: the batch, then each job.
func BenchmarkDecodeBatchBody(b *testing.B) {
	data := batchBody(MaxBatchJobs, 1000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := DecodeBatch(data)
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range r.Jobs {
			if _, err := DecodeSubmit(j); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDuplicateKeyCheck is the check alone, on the typical submit
// body.
func BenchmarkDuplicateKeyCheck(b *testing.B) {
	data := []byte(typicalSubmit)
	t := reflect.TypeFor[*SubmitRequest]()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if de := checkDuplicateKeys(data, t, false); de != nil {
			b.Fatal(de)
		}
	}
}

// BenchmarkDuplicateKeyCheckBatch is the check alone on the 1 MiB batch,
// as decoding it runs it: the batch (its jobs skipped), then each job.
func BenchmarkDuplicateKeyCheckBatch(b *testing.B) {
	data := batchBody(MaxBatchJobs, 1000)
	r, err := DecodeBatch(data)
	if err != nil {
		b.Fatal(err)
	}
	bt, st := reflect.TypeFor[*BatchRequest](), reflect.TypeFor[*SubmitRequest]()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if de := checkDuplicateKeys(data, bt, true); de != nil {
			b.Fatal(de)
		}
		for _, j := range r.Jobs {
			if de := checkDuplicateKeys(j, st, false); de != nil {
				b.Fatal(de)
			}
		}
	}
}
