// Lanes follow their text as it streams, until the viewer scrolls up in a lane; scrolling back to its
// bottom follows again, and a new race or replay follows from the start. Gradio replaces a lane's HTML on
// every update (patching its text in place, or a new box that opens at its top), so what each lane is doing
// is kept here, by lane.
(() => {
  if (window.__lanesFollow) return;  // Gradio may put the page's head in twice
  window.__lanesFollow = true;
  const NEAR_BOTTOM_PX = 24;
  const following = {};  // lane id -> false once the viewer scrolled up in it
  const offset = {};  // lane id -> where the viewer left it
  const boxOf = lane => lane.querySelector('.lane-text');

  // Where the box stands, if not where this script last placed it: the viewer moved it.
  const movedByViewer = box => box.dataset.placed === undefined
    || Math.abs(box.scrollTop - Number(box.dataset.placed)) > 1;
  const noteViewer = (lane, box) => {
    delete box.dataset.placed;  // from here on every scroll counts, back to the bottom included
    following[lane.id] = box.scrollHeight - box.scrollTop - box.clientHeight <= NEAR_BOTTOM_PX;
    offset[lane.id] = box.scrollTop;
  };

  document.addEventListener('scroll', event => {
    const box = event.target;
    if (!(box instanceof Element) || !box.classList.contains('lane-text')) return;
    // The scroll this script made: ignored. Any other is the viewer's, even in the same frame as a placing
    // (a frame-long guard lost the viewer's scroll on a busy machine, and the lane went on following).
    if (!movedByViewer(box)) return;
    const lane = box.closest('[id^="lane-"]');
    if (lane) noteViewer(lane, box);
  }, true);

  const shownBox = {};  // lane id -> the box last placed (Gradio may replace it, or patch it in place)
  const place = lane => {
    const box = boxOf(lane);
    if (!box) return;
    const fresh = shownBox[lane.id] !== box;
    shownBox[lane.id] = box;
    // The viewer scrolled since the last placing and an update came before the browser sent the scroll
    // event (it sends them with the next frame): the scroll counts now, or placing would undo it.
    if (!fresh && box.dataset.placed !== undefined && movedByViewer(box)) noteViewer(lane, box);
    if (following[lane.id] === false && !fresh) return;  // the viewer's own scroll position stands
    box.scrollTop = following[lane.id] === false ? (offset[lane.id] || 0) : box.scrollHeight;
    box.dataset.placed = String(box.scrollTop);  // where it landed (the browser clamps it to the bottom)
  };

  const restart = () => { for (const id of Object.keys(following)) delete following[id]; };
  // Run brings the race into view: the legend at the top, then both lanes with their live figures and the
  // badge under them. If the Run is refused instead, its message (beside the input it names) comes into view.
  const REFUSAL_WATCH_MS = 4000;
  const showRace = () => {
    const top = document.getElementById('race-top');
    if (top) top.scrollIntoView({block: 'start'});
    const until = Date.now() + REFUSAL_WATCH_MS;
    const look = () => {
      const refused = document.querySelector('div.validation-error');
      if (refused) refused.scrollIntoView({block: 'center'});
      else if (Date.now() < until) setTimeout(look, 100);
    };
    setTimeout(look, 100);
  };
  document.addEventListener('click', event => {
    if (!(event.target instanceof Element)) return;
    if (event.target.closest('#run, #replay')) restart();
    if (event.target.closest('#run, #replay, #replay-again')) showRace();
  }, true);

  // A number typed in a slider's box stands as typed. Gradio's slider pulls it into range when the box loses
  // focus, as it does when Run is pressed, so 0 raced 1 token and 9999 raced 512 without a word; kept, Run sends
  // it and the page refuses it with the API's own sentence beside the slider. Stopped here, in the capture
  // phase, the blur never reaches the slider's own listener. The inspector's step slider is left as it is: its
  // sentence shows as soon as the value is typed, and the value is then pulled into range.
  const SLIDER_BOX = 'input[type="number"][aria-label^="number input for "]';
  document.addEventListener('blur', event => {
    const box = event.target;
    if (box instanceof Element && box.matches(SLIDER_BOX) && !box.closest('#step')) event.stopPropagation();
  }, true);

  new MutationObserver(records => {
    const lanes = new Set();
    for (const record of records) {
      const node = record.target instanceof Element ? record.target : record.target.parentElement;
      const lane = node && node.closest('[id^="lane-"]');
      if (lane) lanes.add(lane);
    }
    lanes.forEach(place);
  }).observe(document.documentElement, {childList: true, characterData: true, subtree: true});
})();
