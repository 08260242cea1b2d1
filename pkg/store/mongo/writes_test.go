package mongo

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestDocsWritten(t *testing.T) {
	t.Parallel()
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name    string
		command string
		reply   bson.D
		want    uint64
	}{
		{"insert", "insert", bson.D{{Key: "n", Value: int32(3)}, {Key: "ok", Value: 1.0}}, 3},
		{"update counts modified, not matched", "update", bson.D{{Key: "n", Value: int32(2)}, {Key: "nModified", Value: int32(1)}}, 1},
		{"update that matched nothing", "update", bson.D{{Key: "n", Value: int32(0)}, {Key: "nModified", Value: int32(0)}}, 0},
		{"upsert", "update", bson.D{{Key: "n", Value: int32(1)}, {Key: "nModified", Value: int32(0)},
			{Key: "upserted", Value: bson.A{bson.D{{Key: "index", Value: int32(0)}, {Key: "_id", Value: "x"}}}}}, 1},
		{"delete", "delete", bson.D{{Key: "n", Value: int64(4)}}, 4},
		{"findAndModify that changed one", "findAndModify", bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: true}}}}, 1},
		{"findAndModify that missed", "findAndModify", bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(0)}}}, {Key: "value", Value: nil}}, 0},
		{"a count as a double", "insert", bson.D{{Key: "n", Value: 2.0}}, 2},
		{"no count", "insert", bson.D{{Key: "ok", Value: 1.0}}, 0},
		{"negative", "delete", bson.D{{Key: "n", Value: int32(-1)}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, docsWritten(tc.command, raw(tc.reply)))
		})
	}
}

// FuzzDocsWritten: a reply of any bytes is read without a panic.
func FuzzDocsWritten(f *testing.F) {
	for _, d := range []bson.D{
		{{Key: "n", Value: int32(1)}},
		{{Key: "nModified", Value: int32(1)}, {Key: "upserted", Value: bson.A{bson.D{{Key: "index", Value: int32(0)}}}}},
		{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}}}},
	} {
		b, err := bson.Marshal(d)
		require.NoError(f, err)
		f.Add("update", b)
	}
	f.Fuzz(func(t *testing.T, command string, reply []byte) {
		for _, c := range []string{command, "insert", "update", "delete", "findAndModify"} {
			_ = docsWritten(c, bson.Raw(reply))
		}
	})
}
