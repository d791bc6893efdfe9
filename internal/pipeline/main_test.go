package pipeline_test

import (
	"testing"

	"github.com/seckill/seckill/internal/redistest"
)

// TestMain stops the shared cluster some tests run on.
func TestMain(m *testing.M) { redistest.Main(m, "pipeline") }
