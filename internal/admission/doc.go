// Package admission is the waiting room's machinery: what a sale with a
// room puts in front of its buys so that arriving a millisecond earlier is
// worth nothing. For now it holds the room's draw: the order in which
// everyone who joined before draw_until is admitted, computed from a
// secret committed to before anyone joined (RunDraw), and checked by anyone
// from the published record alone (Verify, `seckill draw verify`).
package admission
