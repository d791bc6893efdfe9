package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/seckill/seckill/internal/admission"
)

const drawUsage = `usage: seckill draw <command> [flags]

commands:
  verify      check a sale's published draw (GET /v1/sales/{sale}/queue/draw) and print its order

Run "seckill draw verify -h" for its flags.
`

// drawStdin is what "seckill draw verify --file -" reads.
var drawStdin io.Reader = os.Stdin

// runDraw dispatches the draw's commands.
func runDraw(_ context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, drawUsage)
		return 2
	}
	switch args[0] {
	case "verify":
		return runDrawVerify(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, drawUsage)
		return 0
	}
	fmt.Fprintf(stderr, "seckill draw: unknown command %q\n\n%s", args[0], drawUsage)
	return 2
}

// runDrawVerify checks a published draw as admission.Verify does and
// prints its order, one entry per line, first admitted first. Exit 0 if
// every check passes, 1 (and the check that failed, on stderr) if one
// does not, 2 if the record cannot be read.
func runDrawVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill draw verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", "", `the published draw, the JSON of GET /v1/sales/{sale}/queue/draw ("-": stdin)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "seckill draw verify: needs --file FILE (- for stdin) and nothing else")
		return 2
	}
	d, err := readDraw(*file)
	if err != nil {
		fmt.Fprintln(stderr, "seckill draw verify:", err)
		return 2
	}
	if err := admission.Verify(d); err != nil {
		var ve *admission.VerifyError
		if errors.As(err, &ve) {
			err = fmt.Errorf("the %s check failed: %s", ve.Check, ve.Detail)
		}
		fmt.Fprintln(stderr, "seckill draw verify:", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	for _, e := range d.Order {
		w.WriteString(e)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "seckill draw verify:", err)
		return 1
	}
	return 0
}

// readDraw reads one draw record, and nothing after it, from a file or
// from stdin ("-").
func readDraw(file string) (admission.Draw, error) {
	r := drawStdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return admission.Draw{}, err
		}
		defer f.Close()
		r = f
	}
	var d admission.Draw
	dec := json.NewDecoder(bufio.NewReader(r))
	if err := dec.Decode(&d); err != nil {
		return admission.Draw{}, fmt.Errorf("%s is not a draw's JSON: %w", file, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return admission.Draw{}, fmt.Errorf("%s is not a draw's JSON: data after the record", file)
	}
	return d, nil
}
