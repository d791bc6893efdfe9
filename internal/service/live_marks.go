package service

import (
	"context"
	"errors"
	"hash/fnv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/pipeline"
)

// streamMarks reads each sale's change marker, in one pipeline (one round
// trip per node): its stream's last generated id, which every script that
// changes the sale moves (each appends its event to the stream in the same
// script), and which trimming the stream does not move back. A sale whose
// stream is missing has the marker "". An error is the pipeline's: a sale
// whose marker could not be read then counts as changed.
func streamMarks(ctx context.Context, rdb redis.UniversalClient, streams pipeline.StreamKeys, saleIDs []string) ([]string, error) {
	cmds := make([]*redis.XInfoStreamCmd, len(saleIDs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range saleIDs {
			cmds[i] = p.XInfoStream(ctx, streams.EventsKey(id))
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return nil, err
	}
	marks := make([]string, len(saleIDs))
	for i, c := range cmds {
		info, err := c.Result()
		switch {
		case err == nil:
			marks[i] = info.LastGeneratedID
		case strings.Contains(err.Error(), "no such key"):
		default:
			return nil, err
		}
	}
	return marks, nil
}

// fnv32 spreads sale ids over a period.
func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
