// Package admission is the waiting room's machinery: what a sale with a
// room puts in front of its buys so that arriving a millisecond earlier is
// worth nothing. It holds the room's draw: the order in which everyone
// who joined before draw_until is admitted, computed from a secret
// committed to before anyone joined (RunDraw), and checked by anyone from
// the published record alone (Verify, `seckill draw verify`); and the room
// itself in Redis (Rooms, room.lua): the buyers' places, the draw's order
// then arrival order, and admissions at a rate and never more live than
// the sale has units left.
package admission
